"""Run profiles: the schema, loading with actionable errors, checks, and the printed plan."""

from airvisor.profile._checks import (
    MachineFacts,
    check_profile,
    component_configs,
    machine_problems,
    semantic_problems,
)
from airvisor.profile._configs import ComponentConfig, component_config, sourced_component_config
from airvisor.profile._load import PROFILE_NAME, available_profiles, find_profile, load_profile
from airvisor.profile._plan import render_plan
from airvisor.profile._problems import Problem, ProfileError
from airvisor.profile._schema import COMPONENTS, ComponentName, PrimeRLVersion, Profile

__all__ = [
    "COMPONENTS",
    "PROFILE_NAME",
    "ComponentConfig",
    "ComponentName",
    "MachineFacts",
    "PrimeRLVersion",
    "Problem",
    "Profile",
    "ProfileError",
    "available_profiles",
    "check_profile",
    "component_config",
    "component_configs",
    "find_profile",
    "load_profile",
    "machine_problems",
    "render_plan",
    "semantic_problems",
    "sourced_component_config",
]

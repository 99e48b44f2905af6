"""Run profiles: the schema, loading with actionable errors, and checks."""

from airvisor.profile._checks import (
    MachineFacts,
    check_profile,
    machine_problems,
    prime_rl_scripts,
    semantic_problems,
)
from airvisor.profile._configs import deep_merge
from airvisor.profile._load import PROFILE_NAME, available_profiles, find_profile, load_profile
from airvisor.profile._problems import Problem, ProfileError
from airvisor.profile._schema import COMPONENTS, ComponentName, PrimeRLVersion, Profile

__all__ = [
    "COMPONENTS",
    "PROFILE_NAME",
    "ComponentName",
    "MachineFacts",
    "PrimeRLVersion",
    "Problem",
    "Profile",
    "ProfileError",
    "available_profiles",
    "check_profile",
    "deep_merge",
    "find_profile",
    "load_profile",
    "machine_problems",
    "prime_rl_scripts",
    "semantic_problems",
]

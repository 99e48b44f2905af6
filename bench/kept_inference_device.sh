#!/bin/sh
# bench/kept_inference_bench.py (stand-ins) on a device machine that has none of the test venvs
# (the workplace's `run` tool: it copies the checkout, plus ignored folders named in `carry`).
#
#   here:   bench/kept_inference_device.sh prepare      -> .bench-device/ (about 22 MiB, ignored)
#   there:  sh bench/kept_inference_device.sh run [bench options]   (carry: .bench-device)
#           BENCH=bench/member_death_bench.py sh bench/kept_inference_device.sh run [options]
#
# `prepare` copies what the device image lacks: prime-rl v0.4's test venv
# (scripts/setup_primerl_venvs.sh: its site-packages without pip, prime-rl v0.4.0's sources, the
# inert torch/wandb stubs) and airvisor's dependencies missing there (pydantic, structlog,
# tomli_w; the venv's builds are for CPython 3.12, the image's python3). `run` makes a venv of
# the image's python3 from them, names it as the v0.4 test venv (AIRVISOR_PRIMERL_V04_VENV) and
# runs the bench with the image's python3: the same prime-rl launcher code and stand-ins as here.
set -eu
DIR=.bench-device

prepare() {
    venv=${AIRVISOR_PRIMERL_V04_VENV:-/opt/airvisor-test/primerl-v0.4}
    site=$(echo "$venv"/lib/python3.12/site-packages)
    src=$(cat "$site/airvisor-prime-rl-v0.4.0.pth")
    exclude=$(git rev-parse --git-path info/exclude)
    grep -qx "/$DIR/" "$exclude" 2>/dev/null || echo "/$DIR/" >>"$exclude"
    rm -rf "$DIR"
    mkdir -p "$DIR/site" "$DIR/prl04-site"
    for name in pydantic pydantic_core annotated_types typing_inspection tomli_w \
                typing_extensions; do
        cp -r "$site/$name"* "$DIR/site/"  # the package and its dist-info
    done
    # pure Python: structlog, and httpx with its dependencies (the kept server's probe)
    for name in structlog httpx httpcore h11 anyio idna certifi; do
        cp -r .venv/lib/python3.11/site-packages/"$name"* "$DIR/site/"
    done
    (cd "$site" && tar cf - --exclude=pip --exclude='pip-*' --exclude='*.pth' \
        --exclude=__pycache__ .) | (cd "$DIR/prl04-site" && tar xf -)
    cp -r "$src" "$DIR/prime-rl-src"
    cp -r "$venv/airvisor-stubs" "$DIR/airvisor-stubs"
    find "$DIR" -name __pycache__ -prune -exec rm -rf {} +
    du -sh "$DIR"
}

run() {
    here=$(pwd)/$DIR
    python3 -m venv --without-pip /tmp/prl04
    site=$(/tmp/prl04/bin/python -c 'import site; print(site.getsitepackages()[0])')
    cp -r "$here/prl04-site/." "$site/"
    echo "$here/prime-rl-src" >"$site/airvisor-prime-rl-v0.4.0.pth"
    echo "$here/airvisor-stubs" >"$site/zz-airvisor-stubs.pth"
    cp -r "$here/airvisor-stubs" /tmp/prl04/
    /tmp/prl04/bin/python -c 'import prime_rl.rl'
    AIRVISOR_PRIMERL_V04_VENV=/tmp/prl04 PYTHONPATH="$here/site:$(pwd)" PYTHONUNBUFFERED=1 \
        exec python3 "${BENCH:-bench/kept_inference_bench.py}" "$@"
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 prepare | run [bench options]" >&2; exit 2 ;;
esac

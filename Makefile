.PHONY: demo test lint

# Install airvisor and run the embedded demo (no GPU needed).
demo:
	scripts/demo.sh

# Install everything the tests need (Docker engine, images, venvs) and run every test.
test:
	scripts/test.sh

lint:
	.venv/bin/ruff check airvisor tests bench envs
	.venv/bin/mypy

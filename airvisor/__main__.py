from airvisor.cli import main

main()

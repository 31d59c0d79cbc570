from harness.cli.app import main

main()

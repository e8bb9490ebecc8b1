from quail.cli.main import main

main()

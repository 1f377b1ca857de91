from attnrec.cli.main import main

main()

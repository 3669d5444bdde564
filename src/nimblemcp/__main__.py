from nimblemcp.cli import main

main()

from automaton_min.cli.main import main

main()

from fastlbp.cli import main

main()

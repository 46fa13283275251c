# `python -m swarm`: the entry module's own import is inside the Ctrl-C handler too (a SIGINT can land while it
# loads; seen in CI: a KeyboardInterrupt traceback from this line), so that moment is also one line and exit 130.
try:
    from swarm.cli.entry import main
except KeyboardInterrupt:
    import sys

    sys.stderr.write("interrupted\n")
    sys.exit(130)

main()

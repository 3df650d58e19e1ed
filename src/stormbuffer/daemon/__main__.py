"""`python -m stormbuffer.daemon`: what a door starts when no daemon serves."""

from .server import main

main()

"""``crashtest --count``'s command for the shop: how many times its provider performed
each tool, as JSON."""

from .shop import count

if __name__ == "__main__":
    count()

# A first program for Sandpool: it reads a name and greets it.
import sys

name = sys.stdin.read().strip() or "world"
print(f"hello, {name}")

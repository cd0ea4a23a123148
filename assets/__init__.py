"""Test recordings and the script that makes them (`python -m assets.make_assets`)."""

"""Test doubles that speak real protocols, so the real client code runs against them."""

"""The built-in scenarios, one module each; importing a module registers it."""

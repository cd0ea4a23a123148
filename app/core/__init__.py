"""The turn-taking core and the chain: the state machine (`floor`), its owner
(`conversation`), the turn and its session, the chain (`pipeline`) and the A/B."""

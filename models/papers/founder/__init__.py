"""Paper 13 (FOUNDER): a world model, a view-B mapping into its states and a temporal-distance reward."""

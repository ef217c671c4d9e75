"""Job 2, generation: an operation spec -> its model -> generated Lua and Python -> every
form run on a client -> verified to agree."""

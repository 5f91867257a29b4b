"""The `keel` command: run the service (`up`, `api`, `worker`, `migrate`, `keys`) and use it."""

"""What gitstate stores, as bytes and names: canonical CBOR, ref-name encoding, state trees,
checkpoint and session-file payloads and their commit messages. Pure functions over the git layer's
reader and writer; no refs are read or moved here (docs/FORMAT.md is the contract)."""

// The wire protocol. See PROTOCOL.md.

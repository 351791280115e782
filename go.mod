module github.com/meerkatd/meerkatd

go 1.26

require github.com/BurntSushi/toml v1.6.0

// Test-only: an independent CBOR implementation the wire codec is checked
// against (comms/wire/oracle_test.go).
require github.com/fxamacker/cbor/v2 v2.10.0

require github.com/x448/float16 v0.8.4 // indirect

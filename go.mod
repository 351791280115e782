module github.com/meerkatd/meerkatd

go 1.26

require (
	github.com/fxamacker/cbor/v2 v2.10.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)

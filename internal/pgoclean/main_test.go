package main

import (
	"bytes"
	"testing"
)

// msg builds protobuf fields: pairs of (field number, value) where a
// uint64 is a varint and a string or []byte length-delimited.
func msg(kv ...any) []byte {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		num := uint64(kv[i].(int))
		switch v := kv[i+1].(type) {
		case int:
			b = appendUvarint(b, num<<3)
			b = appendUvarint(b, uint64(v))
		case string:
			b = appendUvarint(b, num<<3|2)
			b = appendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		case []byte:
			b = appendUvarint(b, num<<3|2)
			b = appendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

func TestBaseMappingNames(t *testing.T) {
	mapping := msg(1, 1, mappingFilename, 2) // id 1, filename: string 2
	for _, tc := range []struct {
		name    string
		in, out []byte
		bad     bool
	}{
		{"mapping file made a base name",
			msg(fieldStringTable, "", fieldMapping, mapping, fieldStringTable, "cpu", fieldStringTable, "/home/someone/bin/meerkatd", 9, 7),
			msg(fieldStringTable, "", fieldMapping, mapping, fieldStringTable, "cpu", fieldStringTable, "meerkatd", 9, 7), false},
		{"other strings kept", msg(fieldStringTable, "", fieldStringTable, "/a/b.go", fieldStringTable, "x"),
			msg(fieldStringTable, "", fieldStringTable, "/a/b.go", fieldStringTable, "x"), false},
		{"a base name already", msg(fieldMapping, mapping, fieldStringTable, "", fieldStringTable, "f", fieldStringTable, "meerkatd"),
			msg(fieldMapping, mapping, fieldStringTable, "", fieldStringTable, "f", fieldStringTable, "meerkatd"), false},
		{"empty", nil, nil, false},
		{"fixed64 and fixed32 kept", append(append([]byte{9<<3 | 1}, make([]byte, 8)...), append([]byte{10<<3 | 5}, 1, 2, 3, 4)...),
			append(append([]byte{9<<3 | 1}, make([]byte, 8)...), append([]byte{10<<3 | 5}, 1, 2, 3, 4)...), false},
		{"length past the end", []byte{fieldStringTable<<3 | 2, 5, 'a'}, nil, true},
		{"varint cut short", []byte{1 << 3, 0x80}, nil, true},
		{"unknown wire type", []byte{1<<3 | 3}, nil, true},
		{"fixed64 cut short", []byte{1<<3 | 1, 0}, nil, true},
		{"malformed mapping", msg(fieldMapping, []byte{0x80}), nil, true},
	} {
		got, err := baseMappingNames(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("%s: error %v, want one: %v", tc.name, err, tc.bad)
			continue
		}
		if !tc.bad && !bytes.Equal(got, tc.out) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.out)
		}
	}
}

// FuzzBaseMappingNames: any input either is refused or comes back as a
// protobuf whose fields split again, never longer than it was.
func FuzzBaseMappingNames(f *testing.F) {
	f.Add(msg(fieldStringTable, "", fieldMapping, msg(mappingFilename, 1), fieldStringTable, "/x/y"))
	f.Add([]byte{0x80, 0x80})
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := baseMappingNames(in)
		if err != nil {
			return
		}
		if len(out) > len(in) {
			t.Fatalf("%q grew to %q", in, out)
		}
		if _, err := fields(out); err != nil {
			t.Fatalf("%q became %q, which does not split: %v", in, out, err)
		}
	})
}

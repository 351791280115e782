// Command pgoclean rewrites a CPU profile (gzipped pprof protobuf) so that
// the file names of its mappings are base names: a profile of a binary
// records the binary's absolute path, which says nothing to profile-guided
// optimisation (it matches functions by name) and names the machine the
// profile was made on. make pgo runs it on the merged profile.
//
//	go run ./internal/pgoclean IN OUT
package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pgoclean IN OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "pgoclean:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxProfile+1))
	if err != nil {
		return err
	}
	if len(raw) > maxProfile {
		return fmt.Errorf("%s: over %d bytes unpacked", in, maxProfile)
	}
	clean, err := baseMappingNames(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(clean); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// maxProfile bounds the unpacked profile.
const maxProfile = 64 << 20

// Fields of pprof's Profile message (profile.proto) used here.
const (
	fieldMapping     = 3 // repeated Mapping
	fieldStringTable = 6 // repeated string
	mappingFilename  = 5 // Mapping.filename: an index into the string table
)

var errMalformed = errors.New("not a pprof profile (malformed protobuf)")

// field is one top-level field of a protobuf message: its number, wire
// type, and the bytes of its value (a varint's or fixed's as they are, a
// length-delimited one's payload).
type field struct {
	num  uint64
	wire byte
	val  []byte
	raw  []byte // the whole field as encoded
}

// fields splits msg into its top-level fields.
func fields(msg []byte) ([]field, error) {
	var out []field
	for len(msg) > 0 {
		start := msg
		key, n := uvarint(msg)
		if n <= 0 {
			return nil, errMalformed
		}
		msg = msg[n:]
		f := field{num: key >> 3, wire: byte(key & 7)}
		switch f.wire {
		case 0:
			_, n := uvarint(msg)
			if n <= 0 {
				return nil, errMalformed
			}
			f.val, msg = msg[:n], msg[n:]
		case 1, 5:
			size := 8
			if f.wire == 5 {
				size = 4
			}
			if len(msg) < size {
				return nil, errMalformed
			}
			f.val, msg = msg[:size], msg[size:]
		case 2:
			l, n := uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return nil, errMalformed
			}
			f.val, msg = msg[n:n+int(l)], msg[n+int(l):]
		default:
			return nil, errMalformed
		}
		f.raw = start[:len(start)-len(msg)]
		out = append(out, f)
	}
	return out, nil
}

// baseMappingNames returns profile (unpacked) with the string-table
// entries that mappings name as their file replaced by their base names;
// every other byte is kept.
func baseMappingNames(profile []byte) ([]byte, error) {
	top, err := fields(profile)
	if err != nil {
		return nil, err
	}
	names := map[uint64]bool{} // string-table indexes of mapping file names
	for _, f := range top {
		if f.num != fieldMapping || f.wire != 2 {
			continue
		}
		sub, err := fields(f.val)
		if err != nil {
			return nil, err
		}
		for _, s := range sub {
			if s.num == mappingFilename && s.wire == 0 {
				idx, _ := uvarint(s.val)
				names[idx] = true
			}
		}
	}
	var out []byte
	var str uint64 // the index of the next string-table entry
	for _, f := range top {
		if f.num != fieldStringTable || f.wire != 2 {
			out = append(out, f.raw...)
			continue
		}
		if names[str] && len(f.val) > 0 {
			base := filepath.Base(string(f.val))
			out = appendUvarint(out, fieldStringTable<<3|2)
			out = appendUvarint(out, uint64(len(base)))
			out = append(out, base...)
		} else {
			out = append(out, f.raw...)
		}
		str++
	}
	return out, nil
}

func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

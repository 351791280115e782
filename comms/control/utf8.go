package control

import (
	"reflect"
	"strings"
	"unicode/utf8"
)

// badText returns the JSON name of the first string in v, a request's
// arguments, that is not valid UTF-8 (name for v itself), and whether
// there is one. JSON would carry such a string with each bad byte
// replaced by U+FFFD, so the daemon would act on other text than the
// caller's: a node in this process refuses it, and so does the client.
// Byte slices (json.RawMessage) are the caller's JSON, not text.
func badText(v reflect.Value, name string) (string, bool) {
	return badTextIn(v, name, 0)
}

// maxTextDepth bounds badText's walk: argument structs are shallow, and a
// cycle of pointers must not recurse for ever.
const maxTextDepth = 32

func badTextIn(v reflect.Value, name string, depth int) (string, bool) {
	if depth > maxTextDepth {
		return "", false
	}
	depth++
	switch v.Kind() {
	case reflect.String:
		return name, !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return badTextIn(v.Elem(), name, depth)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue // an embedded struct's fields are promoted even so
			}
			tag := f.Tag.Get("json")
			n, _, _ := strings.Cut(tag, ",")
			switch {
			case tag == "-":
				continue // not sent ("-," names a member "-")
			case f.Anonymous && n == "":
				n = name // promoted fields
			case n == "":
				n = f.Name
			}
			if p, bad := badTextIn(v.Field(i), n, depth); bad {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false
		}
		for i := range v.Len() {
			if p, bad := badTextIn(v.Index(i), name, depth); bad {
				return p, true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if p, bad := badTextIn(it.Key(), name, depth); bad {
				return p, true
			}
			if p, bad := badTextIn(it.Value(), name, depth); bad {
				return p, true
			}
		}
	}
	return "", false
}

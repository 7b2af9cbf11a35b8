package temporalglue

import (
	"reflect"
	"runtime"
	"strings"
)

// Name returns the activity or workflow type name Temporal derives from the
// function fn by reflection: the function's name without its package, or a
// method's name without its receiver. A string is returned as it is.
func Name(fn any) string {
	if s, ok := fn.(string); ok {
		return s
	}
	full := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	short := full[strings.LastIndexByte(full, '.')+1:]
	return strings.TrimSuffix(short, "-fm")
}

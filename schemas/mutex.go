package schemas

import (
	"text/template"
)

// ParseMutexKey parses a task's concurrency.mutex_key: a Go text/template
// that the executor renders over the attempt's payload, decoded from JSON
// (objects as map[string]any, numbers as written), so that "{{.shop_id}}"
// reads the payload's field shop_id. The template runs with
// missingkey=error: a payload without a field the key names fails the
// attempt instead of rendering "<no value>". The template is named
// "mutex_key"; it has the standard template functions only.
func ParseMutexKey(text string) (*template.Template, error) {
	return template.New("mutex_key").Option("missingkey=error").Parse(text)
}

// ParseHashKey parses a task's dispatch.hash_key: a Go text/template that
// the dispatcher renders over the attempt's payload exactly as the executor
// renders a mutex key (see [ParseMutexKey]). The template is named "hash_key".
func ParseHashKey(text string) (*template.Template, error) {
	return template.New("hash_key").Option("missingkey=error").Parse(text)
}

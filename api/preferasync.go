package api

import (
	"net/http"
	"strings"
)

// respondAsync reports whether the request asks not to wait for the
// dispatcher (RFC 7240: "Prefer: respond-async"), and then says so on the
// answer (Preference-Applied). A firing is then answered from the publish's
// acknowledgement: the firing is durable in JetStream, and the caller reads
// the instance by its event id (GET /v1/tasks/{name}/instances/{event_id})
// if it wants it. Without the preference the API waits up to RunWait for
// the instance, which costs the caller a few dispatcher batches.
func respondAsync(w http.ResponseWriter, r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for p := range strings.SplitSeq(v, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(p), ";"); strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				w.Header().Set("Preference-Applied", "respond-async")
				return true
			}
		}
	}
	return false
}

package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's OpenAPI 3.1 document (api/openapi.json), served at
// GET /v1/openapi.json. A test checks that it describes every route of
// [Routes] and no other, with the role each needs.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Service) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	// A failed write means the client went away.
	_, _ = w.Write(OpenAPI)
	return nil
}

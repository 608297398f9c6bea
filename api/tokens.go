package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

func (s *Service) listTokens(w http.ResponseWriter, r *http.Request) error {
	toks, err := s.opts.Store.ListTokens(r.Context())
	if err != nil {
		return internal("list tokens", err)
	}
	if toks == nil {
		toks = []schemas.Token{}
	}
	writeJSON(w, http.StatusOK, wire.TokenList{Tokens: toks})
	return nil
}

func (s *Service) createToken(w http.ResponseWriter, r *http.Request) error {
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var req wire.CreateTokenRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return badRequest("invalid_request", te.Field, `the body must be an object like {"name": "ci", "role": "operator"}`)
		}
		if field := decodeErrorField(err); field != "" {
			return badRequest("unknown_field", field, `unknown field %q; send an object like {"name": "ci", "role": "operator"}`, field)
		}
		e := jsonSyntaxError(data, err)
		e.Message += `; send an object like {"name": "ci", "role": "operator"}`
		return e
	}
	if err := store.ValidateTokenName(req.Name); err != nil {
		return badRequest("invalid_token_name", "name", "%v", err)
	}
	if _, err := schemas.ParseRole(string(req.Role)); err != nil {
		return badRequest("invalid_role", "role", "%v", err)
	}
	tok, secret, err := s.opts.Store.CreateToken(r.Context(), req.Name, req.Role, operator(r))
	if errors.Is(err, store.ErrTokenNameTaken) {
		return &wire.Error{Status: http.StatusConflict, Code: "token_name_taken", Field: "name",
			Message: fmt.Sprintf("a live token is already called %q; revoke it first (DELETE /v1/tokens/{id}, ax token revoke) or choose another name", req.Name)}
	}
	if err != nil {
		return internal("create token "+req.Name, err)
	}
	s.opts.Logger.Info().Str("token", tok.Name).Str("role", string(tok.Role)).Str("operator", operator(r)).Msg("token created")
	writeJSON(w, http.StatusCreated, wire.CreatedToken{Token: tok, Secret: secret})
	return nil
}

func (s *Service) revokeToken(w http.ResponseWriter, r *http.Request) error {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return badRequest("invalid_token_id", "id", "%q is not a token id: use the number GET /v1/tokens (ax token list) shows", raw)
	}
	tok, err := s.opts.Store.RevokeToken(r.Context(), raw, operator(r))
	if errors.Is(err, store.ErrNotFound) {
		return &wire.Error{Status: http.StatusNotFound, Code: "token_not_found", Field: "id",
			Message: fmt.Sprintf("no live token has id %d; list them with GET /v1/tokens (ax token list)", id)}
	}
	if err != nil {
		return internal(fmt.Sprintf("revoke token %d", id), err)
	}
	s.tokens.forget(tok.ID)
	s.opts.Logger.Info().Str("token", tok.Name).Str("operator", operator(r)).Msg("token revoked")
	writeJSON(w, http.StatusOK, tok)
	return nil
}

package http

import (
	"encoding/json"
	"net/http"
)

type errorBody struct {
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
	EventID   string `json:"event_id,omitempty"`
}

// encode writes v as JSON with the status.
func encode(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes the API's error format.
func writeError(w http.ResponseWriter, _ *http.Request, status int, code, msg, eventID string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaderboard"`)
	}
	encode(w, status, errorBody{ErrorCode: code, Message: msg, EventID: eventID})
}

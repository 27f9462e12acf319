// Package handlers holds the pipeline's reactions to messages, one file each
// (apply_score.go, notify_top_changed.go, publish_changes.go), each with the small
// interfaces it needs of the stores; errors.go marks the failures that can never succeed.
package handlers

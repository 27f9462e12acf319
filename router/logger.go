package router

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// logger adapts slog to Watermill's LoggerAdapter, building attributes only for records
// that will be written: Watermill logs at debug and trace level for every message.
type logger struct{ l *slog.Logger }

// levelTrace is below slog's debug level, as Watermill's trace is below its debug.
const levelTrace = slog.LevelDebug - 4

// NewLogger adapts slog to Watermill's logger.
func NewLogger(l *slog.Logger) watermill.LoggerAdapter { return logger{l: l} }

func (a logger) log(level slog.Level, msg string, err error, fields watermill.LogFields) {
	if !a.l.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields)+1)
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	for k, v := range fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	a.l.LogAttrs(context.Background(), level, msg, attrs...)
}

func (a logger) Error(msg string, err error, fields watermill.LogFields) {
	a.log(slog.LevelError, msg, err, fields)
}
func (a logger) Info(msg string, fields watermill.LogFields) { a.log(slog.LevelInfo, msg, nil, fields) }
func (a logger) Debug(msg string, fields watermill.LogFields) {
	a.log(slog.LevelDebug, msg, nil, fields)
}
func (a logger) Trace(msg string, fields watermill.LogFields) { a.log(levelTrace, msg, nil, fields) }

func (a logger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	args := make([]any, 0, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	return logger{l: a.l.With(args...)}
}

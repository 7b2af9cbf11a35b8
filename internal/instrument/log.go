package instrument

import (
	"context"
	"log/slog"
)

// warnDefault is the default log handler: slog.Default(), read at each
// record so a default installed later is honoured, keeping warnings and
// errors only.
type warnDefault struct{}

func (warnDefault) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Enabled(ctx, l)
}
func (warnDefault) Handle(ctx context.Context, r slog.Record) error {
	return slog.Default().Handler().Handle(ctx, r)
}
func (warnDefault) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{slog.Default().Handler().WithAttrs(as)}
}
func (warnDefault) WithGroup(name string) slog.Handler {
	return minLevel{slog.Default().Handler().WithGroup(name)}
}

// minLevel keeps warnings and errors of a fixed handler.
type minLevel struct{ slog.Handler }

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}
func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler { return minLevel{h.Handler.WithAttrs(as)} }
func (h minLevel) WithGroup(name string) slog.Handler    { return minLevel{h.Handler.WithGroup(name)} }

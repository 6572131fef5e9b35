// The streaming levels of `bench router`: how many streams are kept in flight
// and each stream's shape at the sim worker. The tables run them, `--profile
// --levels N` profiles one, and the CLI checks --levels against them, so
// this module stays free of the benches' imports.

export interface Level {
  streams: number;
  shape: { ttftMs: number; interTokenMs: number; tokens: number };
}

export const STREAM_LEVELS: readonly Level[] = [
  { streams: 1, shape: { ttftMs: 20, interTokenMs: 20, tokens: 10 } },
  { streams: 100, shape: { ttftMs: 50, interTokenMs: 50, tokens: 20 } },
  { streams: 1000, shape: { ttftMs: 100, interTokenMs: 100, tokens: 20 } },
];

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

/** The level of `streams` streams; `who` names the command in the error for any other count. */
export function levelOf(streams: number, who: string): Level {
  const level = STREAM_LEVELS.find((l) => l.streams === streams);
  if (!level) throw new Error(`${who}: no stream level ${streams} (levels: ${STREAM_LEVELS.map((l) => l.streams).join(", ")})`);
  return level;
}

/** How long one of the level's streams lasts at the sim worker (its first token, then the rest). */
export function streamLifeS(level: Level): number {
  return (level.shape.ttftMs + level.shape.interTokenMs * level.shape.tokens) / 1000;
}

/** Arrivals per second that keep the level's streams in flight. */
export function arrivalRate(level: Level): number {
  return level.streams / streamLifeS(level);
}

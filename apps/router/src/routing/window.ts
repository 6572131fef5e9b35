// The scorer's rolling window: a ring of timestamped values with bounded
// memory, whose old samples age out, and a cached p95.

/** A ring of timestamped values: bounded memory, old samples age out. */
export class Window {
  private readonly at: Float64Array;
  private readonly values: Float64Array;
  private next = 0;
  private size = 0;
  private cache: { p95: number; n: number; computedAt: number } | undefined;

  constructor(capacity: number) {
    this.at = new Float64Array(capacity);
    this.values = new Float64Array(capacity);
  }

  add(now: number, value: number): void {
    this.at[this.next] = now;
    this.values[this.next] = value;
    this.next = (this.next + 1) % this.at.length;
    this.size = Math.min(this.size + 1, this.at.length);
    // While few samples exist each one matters; later the p95 is refreshed on a timer.
    if (this.cache && this.cache.n < 16) this.cache = undefined;
  }

  /** Values younger than windowMs. */
  live(now: number, windowMs: number): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.size; i++) if (now - this.at[i]! <= windowMs) out.push(this.values[i]!);
    return out;
  }

  /** Sum and count of the values younger than windowMs. */
  sum(now: number, windowMs: number): { sum: number; n: number } {
    let sum = 0;
    let n = 0;
    for (let i = 0; i < this.size; i++) {
      if (now - this.at[i]! <= windowMs) {
        sum += this.values[i]!;
        n++;
      }
    }
    return { sum, n };
  }

  /** p95 and sample count, recomputed at most every 100 ms (sooner while samples are few). */
  p95(now: number, windowMs: number): { p95: number; n: number } {
    if (this.cache && now - this.cache.computedAt < 100) return this.cache;
    const xs = this.live(now, windowMs).sort((a, b) => a - b);
    const p95 = xs.length === 0 ? NaN : xs[Math.min(xs.length - 1, Math.ceil(0.95 * xs.length) - 1)]!;
    this.cache = { p95, n: xs.length, computedAt: now };
    return this.cache;
  }
}

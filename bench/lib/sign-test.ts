// How sure a count of rounds is. `--against` says in how many of N rounds
// one build used less CPU than the other; on this box a round's ratio moves
// by ±3 % between identical builds, so "4 of 6" is what a coin gives two
// times in three. The sign test puts a number on it: the chance that two
// builds which cost the same would split at least this unevenly, either
// way (two-sided, each round a fair coin; rounds that tie are left out).

/** n choose k, exact for the round counts a bench runs (n ≤ 1000 stays finite in doubles). */
function choose(n: number, k: number): number {
  let c = 1;
  for (let i = 1; i <= k; i++) c = (c * (n - k + i)) / i;
  return c;
}

/**
 * Two-sided sign test: the probability, under a fair coin per round, of a
 * split at least as uneven as `wins` of `n`. 1 when n is 0.
 */
export function signTestP(wins: number, n: number): number {
  if (!Number.isInteger(wins) || !Number.isInteger(n) || wins < 0 || n < 0 || wins > n) throw new RangeError(`signTestP: ${wins} of ${n}`);
  if (n === 0) return 1;
  const k = Math.min(wins, n - wins);
  let tail = 0;
  for (let i = 0; i <= k; i++) tail += choose(n, i);
  return Math.min(1, (2 * tail) / 2 ** n);
}

/** `wins` of `n` rounds with its sign-test p, as the tables print it: "5 of 6 rounds (sign test p = 0.22)". */
export function winsOf(wins: number, n: number): string {
  const p = signTestP(wins, n);
  return `${wins} of ${n} rounds (sign test p ${p < 0.001 ? "< 0.001" : `= ${p.toFixed(p < 0.1 ? 3 : 2)}`})`;
}

// The budget day: the calendar date in the tenant's time zone, so the day
// rolls over at the tenant's midnight.
const formatters = new Map<string, Intl.DateTimeFormat>();

/** YYYY-MM-DD of `at` in the IANA zone `timeZone`; throws RangeError for an unknown zone. */
export function budgetDay(at: Date | number, timeZone = "UTC"): string {
  // UTC needs no calendar lookup (and is most tenants' zone): a fast path.
  if (timeZone === "UTC") return new Date(at).toISOString().slice(0, 10);
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-CA", { timeZone, year: "numeric", month: "2-digit", day: "2-digit" });
    formatters.set(timeZone, f);
  }
  const parts = Object.fromEntries(f.formatToParts(at).map((p) => [p.type, p.value]));
  return `${parts.year}-${parts.month}-${parts.day}`;
}

/** True when `timeZone` is a zone this runtime (and so budgetDay) understands. */
export function isValidTimeZone(timeZone: string): boolean {
  try {
    budgetDay(0, timeZone);
    return true;
  } catch {
    return false;
  }
}

// A progress line for long steps (downloads, builds): redrawn in place on a
// terminal, a line every few seconds otherwise (CI logs stay readable).
export class Progress {
  private last = 0;
  private readonly tty = process.stderr.isTTY === true;
  constructor(private readonly label: string) {}

  update(done: number, total: number | undefined, unit: "bytes" | "items" = "bytes"): void {
    const now = Date.now();
    if (now - this.last < (this.tty ? 100 : 3000) && done !== total) return;
    this.last = now;
    const fmt = (n: number) => (unit === "bytes" ? `${(n / 1048576).toFixed(1)} MiB` : String(n));
    let line = `${this.label}: ${fmt(done)}`;
    if (total) {
      const pct = Math.min(100, (done / total) * 100);
      const width = 24;
      const filled = Math.round((pct / 100) * width);
      line = `${this.label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${pct.toFixed(0).padStart(3)}% ${fmt(done)}/${fmt(total)}`;
    }
    process.stderr.write(this.tty ? `\r${line}\x1b[K` : `${line}\n`);
  }

  done(message: string): void {
    process.stderr.write(this.tty ? `\r${this.label}: ${message}\x1b[K\n` : `${this.label}: ${message}\n`);
  }
}

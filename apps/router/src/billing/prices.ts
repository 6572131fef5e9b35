// The router's price book: the price in force for each paid backend × model,
// read from Postgres every billing.refreshMs so the request path never waits
// on a query. A price set with `switchyard prices set` reaches every router
// within one refresh.
import { currentPrices, tokenPriceOf, type Db, type TokenPrice } from "@switchyard/db";
import { anthropicBilled } from "../backends/anthropic/betas.ts";
import type { Logger } from "../observability/log.ts";

export interface PriceBook {
  /** The price in force now for a backend kind and the model it knows; undefined: none set. */
  price(backend: string, model: string): TokenPrice | undefined;
}

/** In-memory twin: prices given up front (tests, benches). */
export class StaticPriceBook implements PriceBook {
  private readonly byKey = new Map<string, TokenPrice>();
  constructor(entries: Array<{ backend: string; model: string } & TokenPrice> = []) {
    for (const e of entries) this.set(e.backend, e.model, e);
  }
  set(backend: string, model: string, price: TokenPrice): void {
    this.byKey.set(`${backend}\u0000${model}`, price);
  }
  price(backend: string, model: string): TokenPrice | undefined {
    return this.byKey.get(`${backend}\u0000${model}`);
  }
}

export class PostgresPriceBook implements PriceBook {
  private book = new StaticPriceBook();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    private readonly refreshMs: number,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    if (this.refreshMs > 0) {
      this.timer = setInterval(() => void this.refresh(), this.refreshMs);
      this.timer.unref();
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  async refresh(): Promise<void> {
    try {
      const next = new StaticPriceBook();
      // tokenPriceOf: the row's long_* columns become its long-context tier (the row as it is would pass for a TokenPrice without one);
      // an Anthropic row without one bills a 1M-context prompt at Anthropic's published tier.
      for (const p of await currentPrices(this.db)) {
        const price = tokenPriceOf(p);
        next.set(p.backend, p.model, p.backend === "anthropic" ? anthropicBilled(price) : price);
      }
      this.book = next;
    } catch (err) {
      // Keep the last prices: a Postgres outage must not make paid backends unpriceable.
      this.log.warn("price refresh failed; keeping the last prices", { error: (err as Error).message });
    }
  }

  price(backend: string, model: string): TokenPrice | undefined {
    return this.book.price(backend, model);
  }
}

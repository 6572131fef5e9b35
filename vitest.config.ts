import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "apps/**/*.test.ts", "packages/**/*.test.ts", "workers/agent/**/*.test.ts", "db/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Integration tests share two CPU cores with real servers; keep files few at a time.
    maxWorkers: 2,
    pool: "forks",
  },
});

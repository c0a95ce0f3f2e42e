// The official openai client, unchanged, against a torchserve-c server: each scenario named on
// the command line runs and its outcome is printed as one JSON object per line, for
// tests/integration/test_openai_node.py to check. Usage:
//     node client.mjs BASE_URL API_KEY MODEL SCENARIO...
// BASE_URL is the API's root (http://127.0.0.1:PORT/v1, or TorchServe's
// http://127.0.0.1:PORT/predictions/MODEL/VERSION/v1).
import OpenAI from "openai";

const [baseURL, apiKey, model, ...scenarios] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const PROMPT = "The keeper woke before the sun and";

function errorOf(e) {
  return {
    error: e.constructor.name,
    status: e.status ?? null,
    param: e.param ?? null,
    code: e.code ?? null,
    type: e.type ?? null,
    message: e.message,
  };
}

const runs = {
  async models() {
    const list = await client.models.list();
    const one = await client.models.retrieve(model);
    return { ids: list.data.map((m) => m.id), one: one.id, owned_by: one.owned_by };
  },
  async completion() {
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 24, temperature: 0 });
    return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage, object: r.object };
  },
  async completion_stream() {
    const stream = await client.completions.create({
      model, prompt: PROMPT, max_tokens: 24, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = "", chunks = 0, finish = null, usage = null;
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      if (!c.choices.length) continue;
      chunks++;
      text += c.choices[0].text;
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    return { text, chunks, finish, usage };
  },
  async chat() {
    const r = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Tell me of the sea" }], max_tokens: 16, temperature: 0,
    });
    const m = r.choices[0].message;
    return { role: m.role, text: m.content, finish: r.choices[0].finish_reason, usage: r.usage, object: r.object };
  },
  async chat_stream() {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Tell me of the sea" }], max_tokens: 16, temperature: 0,
      stream: true, stream_options: { include_usage: true },
    });
    let text = "", role = null, finish = null, usage = null;
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      if (!c.choices.length) continue;
      const d = c.choices[0].delta;
      if (d.role) role = d.role;
      if (d.content) text += d.content;
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    return { role, text, finish, usage };
  },
  async stop() {
    const r = await client.completions.create({
      model, prompt: PROMPT, max_tokens: 40, temperature: 0, stop: ["the t"],
    });
    return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
  },
  async seeded() {
    const ask = (seed) => client.completions.create({
      model, prompt: PROMPT, max_tokens: 32, temperature: 1, top_p: 0.95, seed,
    }).then((r) => r.choices[0].text);
    return { a: await ask(7), b: await ask(7), c: await ask(8) };
  },
  async abort() {
    // a long stream, cut by the client after a few chunks
    const stream = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Go on and on" }], max_tokens: 400, temperature: 0,
      stream: true,
    });
    let chunks = 0, aborted = false;
    try {
      for await (const c of stream) {
        if (++chunks === 5) stream.controller.abort();
      }
    } catch (e) {
      aborted = e.constructor.name;
    }
    return { chunks, aborted };
  },
  async bad_n() {
    try {
      await client.completions.create({ model, prompt: PROMPT, n: 2 });
      return { error: null };
    } catch (e) {
      return errorOf(e);
    }
  },
  async unknown_model() {
    try {
      await client.chat.completions.create({ model: "no_such_model", messages: [{ role: "user", content: "x" }] });
      return { error: null };
    } catch (e) {
      return errorOf(e);
    }
  },
  async too_long() {
    try {
      await client.completions.create({ model, prompt: "x".repeat(600), max_tokens: 4 });
      return { error: null };
    } catch (e) {
      return errorOf(e);
    }
  },
};

for (const s of scenarios) {
  let out;
  try {
    out = await runs[s]();
  } catch (e) {
    out = errorOf(e);
  }
  console.log(JSON.stringify({ scenario: s, ...out }));
}

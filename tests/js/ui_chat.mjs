// One useChat turn through the ai package, as a client that knows no approval parts decides: the
// transport useChat uses by default posts the message, readUIMessageStream reads our UI message
// stream back into the assistant's message. The run ends at an approval: its data-approval part is
// approved on the decisions endpoint, and the rest of the turn is read from the resumable stream
// (a replay of the turn from its start). Prints the message and the types of the chunks of each
// response, as JSON.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [api, chatId, prompt, decisions] = process.argv.slice(2);
const transport = new DefaultChatTransport({ api });

async function read(stream) {
  const [parts, copy] = stream.tee();
  const chunks = [];
  const reading = (async () => {
    for await (const chunk of copy) chunks.push(chunk.type);
  })();
  let last;
  for await (const message of readUIMessageStream({ stream: parts, terminateOnError: true })) last = message;
  await reading;
  return { message: last, chunks };
}

const first = await read(
  await transport.sendMessages({
    chatId,
    messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: prompt }] }],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  }),
);
const waiting = first.message.parts.filter((p) => p.type === "data-approval" && p.data.state === "pending");
for (const part of waiting) {
  const response = await fetch(decisions, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ call_id: part.data.call_id, approve: true, by: "ui" }),
  });
  if (!response.ok) throw new Error(await response.text());
}
const rest = await read(await transport.reconnectToStream({ chatId }));
const after = await transport.reconnectToStream({ chatId });
console.log(
  JSON.stringify({ first: first.message, message: rest.message, chunks: [first.chunks, rest.chunks], after }),
);

// The JavaScript SDK v3 against `vsqs serve` (tests/serve/test_clients.py runs it with node):
// node client.mjs ENDPOINT_URL PREFIX. Prints one JSON object of what it saw; any error
// from the SDK (an SQS error code, a bad MD5 digest) exits non-zero with it on stderr.
import {
  SQSClient,
  CreateQueueCommand,
  GetQueueUrlCommand,
  SendMessageCommand,
  SendMessageBatchCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, prefix] = process.argv.slice(2);
const client = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "dummy" },
  maxAttempts: 1,
});

async function receiveAll(queueUrl, count) {
  // Receive up to `count` messages, deleting each (batches of up to 10).
  const got = [];
  for (let round = 0; round < 20 && got.length < count; round++) {
    const answer = await client.send(new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 1,
      MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["All"],
    }));
    const messages = answer.Messages ?? [];
    for (const m of messages) {
      got.push({
        body: m.Body,
        group: m.Attributes?.MessageGroupId ?? null,
        attributes: Object.fromEntries(
          Object.entries(m.MessageAttributes ?? {}).map(([k, v]) => [k, v.StringValue ?? null])),
      });
    }
    if (messages.length > 0) {
      const deleted = await client.send(new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
      }));
      if ((deleted.Failed ?? []).length > 0) throw new Error(JSON.stringify(deleted.Failed));
    }
  }
  return got;
}

const out = {};
// A standard queue: send, send a batch, receive, delete.
const created = await client.send(new CreateQueueCommand({ QueueName: `${prefix}-std` }));
const url = created.QueueUrl;
out.url = url;
out.lookedUp = (await client.send(new GetQueueUrlCommand({ QueueName: `${prefix}-std` }))).QueueUrl;
await client.send(new SendMessageCommand({
  QueueUrl: url,
  MessageBody: "one from node",
  MessageAttributes: { lang: { DataType: "String", StringValue: "javascript" } },
}));
const batch = await client.send(new SendMessageBatchCommand({
  QueueUrl: url,
  Entries: [0, 1, 2].map((i) => ({ Id: `m${i}`, MessageBody: `batch ${i}` })),
}));
out.batchSent = (batch.Successful ?? []).length;
out.batchFailed = (batch.Failed ?? []).length;
const first = await client.send(new ReceiveMessageCommand({
  QueueUrl: url, MaxNumberOfMessages: 1, MessageAttributeNames: ["All"],
}));
const one = first.Messages[0];
out.first = { body: one.Body, lang: one.MessageAttributes?.lang?.StringValue ?? null };
await client.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: one.ReceiptHandle }));
out.rest = (await receiveAll(url, 3)).map((m) => m.body);
// One left in the queue for the test to find through the library.
await client.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "left for python" }));
const attrs = await client.send(new GetQueueAttributesCommand({
  QueueUrl: url, AttributeNames: ["All"],
}));
out.visible = attrs.Attributes.ApproximateNumberOfMessages;

// A FIFO queue with groups: order per group, the group given back.
const fifo = (await client.send(new CreateQueueCommand({
  QueueName: `${prefix}-groups.fifo`,
  Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" },
}))).QueueUrl;
out.fifoUrl = fifo;
for (let i = 0; i < 3; i++) {
  for (const group of ["red", "blue"]) {
    await client.send(new SendMessageCommand({
      QueueUrl: fifo, MessageBody: `${group} ${i}`, MessageGroupId: group,
    }));
  }
}
// The same body again within the window: deduplicated (content-based).
const again = await client.send(new SendMessageCommand({
  QueueUrl: fifo, MessageBody: "red 0", MessageGroupId: "red",
}));
out.dedupMessageId = again.MessageId;
const fifoBatch = await client.send(new SendMessageBatchCommand({
  QueueUrl: fifo,
  Entries: [3, 4].map((i) => ({ Id: `g${i}`, MessageBody: `blue ${i}`, MessageGroupId: "blue" })),
}));
out.fifoBatchSent = (fifoBatch.Successful ?? []).length;
out.fifo = await receiveAll(fifo, 8);
console.log(JSON.stringify(out));

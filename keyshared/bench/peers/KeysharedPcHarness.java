/*
 * Times Confluent Parallel Consumer on a keyshared bench topic, the way keyshared's bench times
 * every contender (keyshared/bench/contenders.py, Tally): from the first handler start to the
 * N-th handler finish, so the group join and JVM start-up are excluded.
 *
 * Shipped as source inside the keyshared package and compiled with javac into the user's cache on
 * first use (keyshared/bench/peers/parallel_consumer.py), so the repository holds no binaries.
 *
 *   java -cp CLASSES:JARS/* KeysharedPcHarness BOOTSTRAP TOPIC GROUP RECORDS HANDLER_NANOS
 *        CONCURRENCY TIMEOUT_SECONDS [BATCH_SIZE [OUTPUT_TOPIC [TRANSACTIONAL]]]
 *
 * BATCH_SIZE > 1 turns on PC's batch mode (ParallelConsumerOptions.batchSize): the handler then
 * receives up to that many records per call (PollContext), touches each value, sleeps
 * HANDLER_NANOS once per call and counts the call's records.
 *
 * OUTPUT_TOPIC makes it consume -> produce (pollAndProduce, one record per input: same key and
 * value, a header "t" with the wall time the handler wrote it, a big-endian double of seconds,
 * as keyshared's eos bench writes it); TRANSACTIONAL=true uses PC's transactional mode
 * (PERIODIC_TRANSACTIONAL_PRODUCER: outputs and offsets in Kafka transactions). Output runs
 * close draining, so every output is produced (and committed) before the process exits.
 *
 * Prints one JSON line, {"records": N, "seconds": S, "every": K, "marks": [...]}, and exits 0;
 * exits 1 (message on stderr) when the records did not all finish within the timeout, 2 on bad
 * arguments. S is the whole run (first handler start to the N-th finish); marks[i] is when
 * completion (i + 1) x K happened, in seconds since that start, for the steady-state figure
 * (keyshared/bench/steady.py): one clock read every K completions, K = max(1, N / 1000), into a
 * preallocated array, so the handler's cost barely changes.
 */

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import io.confluent.parallelconsumer.internal.AbstractParallelEoSStreamProcessor;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KeysharedPcHarness {

    private KeysharedPcHarness() {
    }

    /** PC's crash cause: on its base class only, not on the ParallelStreamProcessor interface. */
    private static Object failureCause(ParallelStreamProcessor<byte[], byte[]> processor) {
        if (processor instanceof AbstractParallelEoSStreamProcessor<?, ?> base) {
            return base.getFailureCause();
        }
        return "unknown";
    }

    private static void pause(long handlerNanos, long millis, int nanos) {
        if (handlerNanos > 0) {
            try {
                Thread.sleep(millis, nanos);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Stamp every mark a handler call took the count across: (before, after] (a batch call can
     *  cross several). Marks past the array (completions beyond N) are not kept. */
    private static void mark(AtomicLongArray marks, long every, long before, long after) {
        long next = (before / every + 1) * every;
        if (next > after) {
            return;
        }
        long now = System.nanoTime();
        for (long k = next; k <= after && k / every <= marks.length(); k += every) {
            marks.set((int) (k / every - 1), now);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 7 || args.length > 10) {
            System.err.println("usage: KeysharedPcHarness BOOTSTRAP TOPIC GROUP RECORDS "
                    + "HANDLER_NANOS CONCURRENCY TIMEOUT_SECONDS "
                    + "[BATCH_SIZE [OUTPUT_TOPIC [TRANSACTIONAL]]]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        long records = Long.parseLong(args[3]);
        long handlerNanos = Long.parseLong(args[4]);
        int concurrency = Integer.parseInt(args[5]);
        long timeoutSeconds = Long.parseLong(args[6]);
        int batchSize = args.length >= 8 ? Integer.parseInt(args[7]) : 1;
        String output = args.length >= 9 ? args[8] : null;
        boolean transactional = args.length >= 10 && Boolean.parseBoolean(args[9]);

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // PC commits by itself and refuses a consumer that auto-commits.
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);

        KafkaProducer<byte[], byte[]> producer = null;
        if (output != null) {
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            if (transactional) {
                p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "keyshared-bench-pc-" + group);
            }
            producer = new KafkaProducer<>(p);
        }
        ParallelConsumerOptions.ParallelConsumerOptionsBuilder<byte[], byte[]> builder =
                ParallelConsumerOptions.<byte[], byte[]>builder()
                .consumer(consumer)
                .ordering(ProcessingOrder.KEY)
                .maxConcurrency(concurrency)
                .commitMode(transactional ? CommitMode.PERIODIC_TRANSACTIONAL_PRODUCER
                        : CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
                .batchSize(batchSize);
        if (producer != null) {
            builder = builder.producer(producer);
        }
        ParallelConsumerOptions<byte[], byte[]> options = builder.build();
        ParallelStreamProcessor<byte[], byte[]> processor =
                ParallelStreamProcessor.createEosStreamProcessor(options);

        AtomicLong first = new AtomicLong(0);
        AtomicLong last = new AtomicLong(0);
        AtomicLong count = new AtomicLong(0);
        CountDownLatch done = new CountDownLatch(1);
        long every = Math.max(1, records / 1000);  // keyshared.bench.steady.mark_every
        AtomicLongArray marks = new AtomicLongArray((int) (records / every));
        long sleepMillis = handlerNanos / 1_000_000L;
        int sleepNanos = (int) (handlerNanos % 1_000_000L);

        processor.subscribe(List.of(topic));
        if (output != null) {
            processor.pollAndProduce(context -> {
                first.compareAndSet(0, System.nanoTime());
                ByteBuffer stamp = ByteBuffer.allocate(8).putDouble(System.currentTimeMillis() / 1000.0);
                ProducerRecord<byte[], byte[]> out = new ProducerRecord<>(output, null,
                        context.key(), context.value(), List.of(new RecordHeader("t", stamp.array())));
                pause(handlerNanos, sleepMillis, sleepNanos);
                long after = count.incrementAndGet();
                mark(marks, every, after - 1, after);
                if (after == records) {
                    last.set(System.nanoTime());
                    done.countDown();
                }
                return out;
            });
        } else {
            processor.poll(context -> {
                first.compareAndSet(0, System.nanoTime());
                long calls = 1;
                if (batchSize > 1) {
                    calls = context.size();
                    context.streamConsumerRecords().forEach(record -> record.value());
                } else {
                    context.value();
                }
                pause(handlerNanos, sleepMillis, sleepNanos);
                long after = count.addAndGet(calls);
                mark(marks, every, after - calls, after);
                if (after >= records && after - calls < records) {
                    last.set(System.nanoTime());
                    done.countDown();
                }
            });
        }

        // Wait in one-second steps so a PC that crashed (broker gone, bad config) fails the run
        // now, with its cause, instead of after the whole timeout.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        boolean finished = false;
        while (!finished && System.nanoTime() < deadline) {
            finished = done.await(1, TimeUnit.SECONDS);
            if (!finished && processor.isClosedOrFailed()) {
                System.err.println("parallel-consumer failed after " + count.get() + " of "
                        + records + " records: " + failureCause(processor));
                System.exit(1);
            }
        }
        if (output != null) {
            processor.closeDrainFirst(Duration.ofSeconds(60));  // every output produced, committed
        } else {
            processor.closeDontDrainFirst(Duration.ofSeconds(10));
        }
        if (!finished) {
            System.err.println("parallel-consumer: only " + count.get() + " of " + records
                    + " records within " + timeoutSeconds + " s");
            System.exit(1);
        }
        double seconds = (last.get() - first.get()) / 1e9;
        StringBuilder line = new StringBuilder("{\"records\": ").append(records)
                .append(", \"seconds\": ").append(seconds)
                .append(", \"every\": ").append(every).append(", \"marks\": [");
        for (int i = 0; i < marks.length(); i++) {
            // Read after close, so every handler call has returned; a mark still 0 would be
            // one whose stamp was lost, and the N-th finish is a safe upper bound for it.
            long stamp = marks.get(i) != 0 ? marks.get(i) : last.get();
            line.append(i == 0 ? "" : ", ").append((stamp - first.get()) / 1e9);
        }
        System.out.println(line.append("]}"));
        System.out.flush();
        System.exit(0);
    }
}

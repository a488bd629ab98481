/*
 * Times Confluent Parallel Consumer on a keyshared bench topic, the way keyshared's bench times
 * every contender (keyshared/bench/contenders.py, Tally): from the first handler start to the
 * N-th handler finish, so the group join and JVM start-up are excluded.
 *
 * Shipped as source inside the keyshared package and compiled with javac into the user's cache on
 * first use (keyshared/bench/peers/parallel_consumer.py), so the repository holds no binaries.
 *
 *   java -cp CLASSES:JARS/* KeysharedPcHarness BOOTSTRAP TOPIC GROUP RECORDS HANDLER_NANOS
 *        CONCURRENCY TIMEOUT_SECONDS [BATCH_SIZE]
 *
 * BATCH_SIZE > 1 turns on PC's batch mode (ParallelConsumerOptions.batchSize): the handler then
 * receives up to that many records per call (PollContext), touches each value, sleeps
 * HANDLER_NANOS once per call and counts the call's records.
 *
 * Prints one JSON line, {"records": N, "seconds": S}, and exits 0; exits 1 (message on stderr)
 * when the records did not all finish within the timeout, 2 on bad arguments.
 */

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import io.confluent.parallelconsumer.internal.AbstractParallelEoSStreamProcessor;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

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

    public static void main(String[] args) throws Exception {
        if (args.length != 7 && args.length != 8) {
            System.err.println("usage: KeysharedPcHarness BOOTSTRAP TOPIC GROUP RECORDS "
                    + "HANDLER_NANOS CONCURRENCY TIMEOUT_SECONDS [BATCH_SIZE]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        long records = Long.parseLong(args[3]);
        long handlerNanos = Long.parseLong(args[4]);
        int concurrency = Integer.parseInt(args[5]);
        long timeoutSeconds = Long.parseLong(args[6]);
        int batchSize = args.length == 8 ? Integer.parseInt(args[7]) : 1;

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // PC commits by itself and refuses a consumer that auto-commits.
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);

        ParallelConsumerOptions<byte[], byte[]> options = ParallelConsumerOptions.<byte[], byte[]>builder()
                .consumer(consumer)
                .ordering(ProcessingOrder.KEY)
                .maxConcurrency(concurrency)
                .commitMode(CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
                .batchSize(batchSize)
                .build();
        ParallelStreamProcessor<byte[], byte[]> processor =
                ParallelStreamProcessor.createEosStreamProcessor(options);

        AtomicLong first = new AtomicLong(0);
        AtomicLong last = new AtomicLong(0);
        AtomicLong count = new AtomicLong(0);
        CountDownLatch done = new CountDownLatch(1);
        long sleepMillis = handlerNanos / 1_000_000L;
        int sleepNanos = (int) (handlerNanos % 1_000_000L);

        processor.subscribe(List.of(topic));
        processor.poll(context -> {
            first.compareAndSet(0, System.nanoTime());
            long calls = 1;
            if (batchSize > 1) {
                calls = context.size();
                context.streamConsumerRecords().forEach(record -> record.value());
            } else {
                context.value();
            }
            if (handlerNanos > 0) {
                try {
                    Thread.sleep(sleepMillis, sleepNanos);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
            long after = count.addAndGet(calls);
            if (after >= records && after - calls < records) {
                last.set(System.nanoTime());
                done.countDown();
            }
        });

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
        processor.closeDontDrainFirst(Duration.ofSeconds(10));
        if (!finished) {
            System.err.println("parallel-consumer: only " + count.get() + " of " + records
                    + " records within " + timeoutSeconds + " s");
            System.exit(1);
        }
        double seconds = (last.get() - first.get()) / 1e9;
        System.out.println("{\"records\": " + records + ", \"seconds\": " + seconds + "}");
        System.out.flush();
        System.exit(0);
    }
}

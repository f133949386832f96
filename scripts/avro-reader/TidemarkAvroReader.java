// TidemarkAvroReader is a plain Kafka consumer, outside Tidemark, that reads one topic of
// Tidemark's Avro (CDC_VALUE_FORMAT=avro) with Apicurio Registry's own Kafka deserializer:
// Confluent's wire format (magic byte, 4-byte schema id) with the id looked up in the registry.
// It reads every partition from the beginning to the end (read_committed) and prints one JSON
// line per record: partition, offset, the schema ids, op, the header naming unchanged TOASTed
// columns, and the key and row images, each
// column as the PostgreSQL text of its value, read only from the Avro schema (logical types,
// Debezium's semantic names "connect.name"). Integration test: TestJavaConsumerReadsAvro.
//
// Usage (Java 11 or later runs the source file; scripts/services.sh install-avro-reader fetches
// the jars):
//   java -cp '<lib>/*' TidemarkAvroReader.java <bootstrap> <topic> <registry v2 API URL> <timeout s>
import io.apicurio.registry.serde.Legacy4ByteIdHandler;
import io.apicurio.registry.serde.SerdeConfig;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.LocalDate;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.Deserializer;

public class TidemarkAvroReader {
    // Debezium's sentinels for infinite timestamps (micros) and dates (epoch days).
    static final long TS_POS_INF = 9223372036825200000L, TS_NEG_INF = -9223372036832400000L;
    static final long DATE_POS_INF = LocalDate.of(-5877611, 6, 21).toEpochDay();
    static final long DATE_NEG_INF = LocalDate.of(-5877611, 6, 22).toEpochDay();
    static final long MICROS_PER_DAY = 86_400_000_000L;

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: TidemarkAvroReader <bootstrap> <topic> <registry v2 URL> <timeout s>");
            System.exit(2);
        }
        String topic = args[1];
        long deadline = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000_000L;
        try (KafkaConsumer<Object, Object> c = new KafkaConsumer<>(consumerProps(args[0]),
                deserializer(args[2], true), deserializer(args[2], false))) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : c.partitionsFor(topic)) {
                parts.add(new TopicPartition(topic, p.partition()));
            }
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            int n = 0;
            while (!reached(c, end)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("not at the end offsets " + end + " in time");
                }
                for (ConsumerRecord<Object, Object> r : c.poll(Duration.ofMillis(500))) {
                    System.out.println(Json.write(line(r)));
                    n++;
                }
            }
            System.err.println("TidemarkAvroReader: " + n + " records of " + topic);
        }
    }

    static Properties consumerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return p;
    }

    // deserializer is Apicurio's Avro deserializer reading Confluent's wire format: the 4-byte
    // id is the registry's content id, which its Confluent-compatible API hands out.
    static Deserializer<Object> deserializer(String url, boolean isKey) {
        Map<String, Object> conf = new HashMap<>();
        conf.put(SerdeConfig.REGISTRY_URL, url);
        conf.put(SerdeConfig.ID_HANDLER, Legacy4ByteIdHandler.class.getName());
        conf.put(SerdeConfig.USE_ID, "contentId");
        conf.put(SerdeConfig.ENABLE_HEADERS, "false");
        AvroKafkaDeserializer<Object> d = new AvroKafkaDeserializer<>();
        d.configure(conf, isKey);
        return new IdDeserializer(d);
    }

    static boolean reached(KafkaConsumer<Object, Object> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    static Map<String, Object> line(ConsumerRecord<Object, Object> r) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("partition", r.partition());
        out.put("offset", r.offset());
        Decoded k = (Decoded) r.key(), val = (Decoded) r.value();
        out.put("keySchemaId", k == null ? null : k.id());
        out.put("key", k == null ? null : image((GenericRecord) k.value()));
        if (val == null) {
            out.put("tombstone", true);
            return out;
        }
        out.put("valueSchemaId", val.id());
        GenericRecord v = (GenericRecord) val.value();
        out.put("op", String.valueOf(v.get("op")));
        out.put("before", image((GenericRecord) v.get("before")));
        out.put("after", image((GenericRecord) v.get("after")));
        // Unchanged TOASTed columns (null in after), named by Tidemark's header, for the merge.
        Header unchanged = r.headers().lastHeader("tidemark.unchanged");
        if (unchanged != null) {
            out.put("unchanged", new String(unchanged.value(), java.nio.charset.StandardCharsets.UTF_8));
        }
        return out;
    }

    // Decoded is what Apicurio's deserializer made of one key or value, with the schema id its
    // bytes carried.
    record Decoded(int id, Object value) {
    }

    // IdDeserializer notes the schema id of Confluent's header and hands the bytes, untouched,
    // to Apicurio's deserializer.
    record IdDeserializer(Deserializer<Object> inner) implements Deserializer<Object> {
        @Override
        public Object deserialize(String topic, byte[] data) {
            return deserialize(topic, null, data);
        }

        @Override
        public Object deserialize(String topic, Headers headers, byte[] data) {
            if (data == null) {
                return null;
            }
            if (data.length < 5 || data[0] != 0) {
                throw new IllegalArgumentException("not Confluent's wire format: " + data.length + " bytes");
            }
            return new Decoded(ByteBuffer.wrap(data, 1, 4).getInt(), inner.deserialize(topic, headers, data));
        }
    }

    // image is a row (or key) record as column name -> PostgreSQL text (or null).
    static Map<String, Object> image(GenericRecord rec) {
        if (rec == null) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        for (Schema.Field f : rec.getSchema().getFields()) {
            Object col = f.getObjectProp("tidemark.column");
            out.put(col != null ? col.toString() : f.name(), text(rec.get(f.pos()), f.schema()));
        }
        return out;
    }

    // text renders one value as PostgreSQL reads it back, by its writer schema.
    static String text(Object v, Schema s) {
        if (v == null) {
            return null;
        }
        if (s.getType() == Schema.Type.UNION) {
            s = s.getTypes().get(GenericData.get().resolveUnion(s, v));
        }
        String name = s.getProp("connect.name");
        String logical = s.getLogicalType() == null ? s.getProp("logicalType") : s.getLogicalType().getName();
        switch (s.getType()) {
            case RECORD:
                GenericRecord r = (GenericRecord) v;
                if ("io.debezium.data.VariableScaleDecimal".equals(name)) {
                    return new BigDecimal(new BigInteger(bytes(r.get("value"))), (Integer) r.get("scale")).toPlainString();
                }
                throw new IllegalArgumentException("record " + s.getFullName() + " is not a column type");
            case ARRAY:
                StringBuilder b = new StringBuilder("{");
                for (Object e : (List<?>) v) {
                    if (b.length() > 1) {
                        b.append(',');
                    }
                    String t = text(e, s.getElementType());
                    b.append(t == null ? "NULL" : "\"" + t.replace("\\", "\\\\").replace("\"", "\\\"") + "\"");
                }
                return b.append('}').toString();
            case BOOLEAN:
                if ("bit".equals(s.getProp("tidemark.type"))) {
                    return (Boolean) v ? "1" : "0";
                }
                return v.toString();
            case INT:
                if ("io.debezium.time.Date".equals(name) || "date".equals(logical)) {
                    return date(((Integer) v).longValue());
                }
                if ("io.debezium.time.Time".equals(name) || "time-millis".equals(logical)) {
                    return clock(((Integer) v).longValue() * 1000);
                }
                return v.toString();
            case LONG:
                return longText((Long) v, name, logical);
            case FLOAT:
            case DOUBLE:
                return v.toString(); // NaN, Infinity, -Infinity, 1.4E-45: float input reads them
            case BYTES:
                return bytesText(bytes(v), s, name, logical);
            case STRING:
                String str = v.toString();
                return "io.debezium.time.ZonedTimestamp".equals(name) ? zoned(str) : str;
            default:
                throw new IllegalArgumentException("unexpected Avro type " + s);
        }
    }

    static String longText(long v, String name, String logical) {
        if (name == null) {
            name = "";
        }
        switch (name) {
            case "io.debezium.time.MicroTime":
                return clock(v);
            case "io.debezium.time.MicroTimestamp":
                return timestamp(v);
            case "io.debezium.time.Timestamp":
                if (v == TS_POS_INF / 1000 || v == TS_NEG_INF / 1000) {
                    return timestamp(v * 1000);
                }
                return timestamp(Math.multiplyExact(v, 1000L));
            default:
                return Long.toString(v); // long, oid, io.debezium.time.MicroDuration (micros)
        }
    }

    static String bytesText(byte[] b, Schema s, String name, String logical) {
        if ("decimal".equals(logical)) {
            int scale = ((Number) s.getObjectProp("scale")).intValue();
            return new BigDecimal(new BigInteger(b), scale).toPlainString();
        }
        if ("io.debezium.data.Bits".equals(name)) {
            return bits(b, s);
        }
        StringBuilder hex = new StringBuilder("\\x");
        for (byte x : b) {
            hex.append(String.format("%02x", x));
        }
        return hex.toString();
    }

    // bits reads io.debezium.data.Bits: bytes little-endian, bit 0 the string's last. A bit(n)
    // has n digits; a varbit (length 2147483647) as many as its highest set bit needs.
    static String bits(byte[] b, Schema s) {
        Object params = s.getObjectProp("connect.parameters");
        int length = Integer.parseInt(((Map<?, ?>) params).get("length").toString());
        int n = length;
        if (length == Integer.MAX_VALUE) {
            n = 0;
            for (int i = 0; i < b.length * 8; i++) {
                if ((b[i / 8] >> (i % 8) & 1) != 0) {
                    n = i + 1;
                }
            }
        }
        StringBuilder out = new StringBuilder();
        for (int i = n - 1; i >= 0; i--) {
            out.append(i / 8 < b.length && (b[i / 8] >> (i % 8) & 1) != 0 ? '1' : '0');
        }
        return out.toString();
    }

    static String date(long day) {
        if (day == DATE_POS_INF) {
            return "infinity";
        }
        if (day == DATE_NEG_INF) {
            return "-infinity";
        }
        return civil(LocalDate.ofEpochDay(day), "");
    }

    // civil renders a date with PostgreSQL's era suffix (year 0 is 1 BC), with time inserted.
    static String civil(LocalDate d, String time) {
        int y = d.getYear();
        String era = "";
        if (y <= 0) {
            y = 1 - y;
            era = " BC";
        }
        return String.format("%04d-%02d-%02d%s%s", y, d.getMonthValue(), d.getDayOfMonth(), time, era);
    }

    static String clock(long micros) {
        return String.format("%02d:%02d:%02d.%06d", micros / 3_600_000_000L, micros / 60_000_000 % 60,
                micros / 1_000_000 % 60, micros % 1_000_000);
    }

    static String timestamp(long micros) {
        if (micros == TS_POS_INF) {
            return "infinity";
        }
        if (micros == TS_NEG_INF) {
            return "-infinity";
        }
        long day = Math.floorDiv(micros, MICROS_PER_DAY);
        return civil(LocalDate.ofEpochDay(day), " " + clock(Math.floorMod(micros, MICROS_PER_DAY)));
    }

    // zoned reads io.debezium.time.ZonedTimestamp (ISO-8601, a year before 1 written -0043).
    static String zoned(String iso) {
        if (iso.equals("infinity") || iso.equals("-infinity")) {
            return iso;
        }
        OffsetDateTime t = OffsetDateTime.parse(iso).withOffsetSameInstant(ZoneOffset.UTC);
        long micros = t.toLocalTime().toNanoOfDay() / 1000;
        return civil(t.toLocalDate(), " " + clock(micros) + "+00");
    }

    static byte[] bytes(Object v) {
        ByteBuffer buf = ((ByteBuffer) v).duplicate();
        byte[] b = new byte[buf.remaining()];
        buf.get(b);
        return b;
    }

    // Json writes maps, lists, strings, numbers, booleans and null as one line of JSON.
    static final class Json {
        static String write(Object v) {
            StringBuilder b = new StringBuilder();
            write(b, v);
            return b.toString();
        }

        static void write(StringBuilder b, Object v) {
            if (v == null) {
                b.append("null");
            } else if (v instanceof Map<?, ?> m) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) {
                        b.append(',');
                    }
                    first = false;
                    string(b, e.getKey().toString());
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (v instanceof Number || v instanceof Boolean) {
                b.append(v);
            } else {
                string(b, v.toString());
            }
        }

        static void string(StringBuilder b, String s) {
            b.append('"');
            for (int i = 0; i < s.length(); i++) {
                char ch = s.charAt(i);
                if (ch == '"' || ch == '\\') {
                    b.append('\\').append(ch);
                } else if (ch < 0x20) {
                    b.append(String.format("\\u%04x", (int) ch));
                } else {
                    b.append(ch);
                }
            }
            b.append('"');
        }
    }
}

import CRdKafka

/// Builds an `rd_kafka_conf_t` from properties. The caller owns the result until it
/// hands it to `rd_kafka_new`, which takes ownership on success.
enum RDKafkaConfig {
    static func make(_ configuration: KafkaConfiguration) throws(KafkaError) -> OpaquePointer {
        let conf = rd_kafka_conf_new()!
        for (key, value) in configuration.properties.sorted(by: { $0.key < $1.key }) {
            do {
                try set(conf, key, value)
            } catch {
                rd_kafka_conf_destroy(conf)
                throw error
            }
        }
        return conf
    }

    static func set(_ conf: OpaquePointer, _ key: String, _ value: String) throws(KafkaError) {
        var errorText = [CChar](repeating: 0, count: 512)
        let result = rd_kafka_conf_set(conf, key, value, &errorText, errorText.count)
        guard result == RD_KAFKA_CONF_OK else {
            var reason = String(decoding: errorText.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            // librdkafka quotes an invalid value; a secret's stays out of the message.
            if KafkaConfiguration.isSecret(key), !value.isEmpty { reason = reason.replacingOccurrences(of: value, with: "****") }
            throw KafkaError(.configuration, "Kafka property '\(key)': \(reason)")
        }
    }

    /// Creates a client handle, taking ownership of `conf` (destroyed on failure too).
    static func makeClient(type: rd_kafka_type_t, conf: OpaquePointer) throws(KafkaError) -> OpaquePointer {
        var errorText = [CChar](repeating: 0, count: 512)
        guard let handle = rd_kafka_new(type, conf, &errorText, errorText.count) else {
            rd_kafka_conf_destroy(conf)
            let reason = String(decoding: errorText.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw KafkaError(.client, "cannot create Kafka client: \(reason)")
        }
        return handle
    }

    static func errorName(_ code: rd_kafka_resp_err_t) -> String {
        String(cString: rd_kafka_err2str(code))
    }
}

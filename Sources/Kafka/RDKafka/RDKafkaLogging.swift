import CRdKafka

/// librdkafka's log and error callbacks, routed into swift-log. They may fire on
/// librdkafka's internal threads, so they only read immutable state.
enum RDKafkaLogging {
    static func install(on conf: OpaquePointer) {
        rd_kafka_conf_set_log_cb(conf) { handle, level, facility, message in
            guard let handle, let context = RDKafkaClientContext.from(handle) else { return }
            let text = "\(facility.map { String(cString: $0) } ?? "rdkafka"): \(message.map { String(cString: $0) } ?? "")"
            switch level {
            case 0...3: context.logger.error("\(text)")
            case 4: context.logger.warning("\(text)")
            case 5, 6: context.logger.info("\(text)")
            default: context.logger.debug("\(text)")
            }
        }
        rd_kafka_conf_set_error_cb(conf) { handle, code, reason, _ in
            guard let handle, let context = RDKafkaClientContext.from(handle) else { return }
            let text = reason.map { String(cString: $0) } ?? RDKafkaConfig.errorName(rd_kafka_resp_err_t(code))
            if rd_kafka_fatal_error(handle, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR {
                context.logger.critical("Kafka fatal error: \(text)")
            } else {
                context.logger.warning("Kafka: \(text)")
            }
        }
    }
}

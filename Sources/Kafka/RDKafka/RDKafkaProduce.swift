import Foundation
import CRdKafka

/// `rd_kafka_produceva`, the non-variadic form of `rd_kafka_producev` that Swift can call.
enum RDKafkaProduce {
    static func produce(_ handle: OpaquePointer, topic: String, key: [UInt8]?, value: [UInt8],
                        headers: [KafkaHeader], timestampMilliseconds: Int64? = nil,
                        opaque: UnsafeMutableRawPointer) -> rd_kafka_resp_err_t {
        topic.withCString { topicName in
            value.withUnsafeBytes { valueBytes in
                withOptionalBytes(key) { keyBytes in
                    withHeaderNames(headers) { headerNames in
                        var values: [rd_kafka_vu_t] = []
                        var vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_TOPIC
                        vu.u.cstr = topicName
                        values.append(vu)
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_VALUE
                        vu.u.mem.ptr = UnsafeMutableRawPointer(mutating: valueBytes.baseAddress)
                        vu.u.mem.size = valueBytes.count
                        values.append(vu)
                        if let keyBytes {
                            vu = rd_kafka_vu_t()
                            vu.vtype = RD_KAFKA_VTYPE_KEY
                            vu.u.mem.ptr = UnsafeMutableRawPointer(mutating: keyBytes.baseAddress)
                            vu.u.mem.size = keyBytes.count
                            values.append(vu)
                        }
                        if let timestampMilliseconds {
                            vu = rd_kafka_vu_t()
                            vu.vtype = RD_KAFKA_VTYPE_TIMESTAMP
                            vu.u.i64 = timestampMilliseconds
                            values.append(vu)
                        }
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_MSGFLAGS
                        vu.u.i = RD_KAFKA_MSG_F_COPY
                        values.append(vu)
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_OPAQUE
                        vu.u.ptr = opaque
                        values.append(vu)
                        return withHeaderValues(headers, names: headerNames, into: values) { allValues in
                            allValues.withUnsafeBufferPointer { buffer in
                                guard let error = rd_kafka_produceva(handle, buffer.baseAddress, buffer.count) else {
                                    return RD_KAFKA_RESP_ERR_NO_ERROR
                                }
                                defer { rd_kafka_error_destroy(error) }
                                return rd_kafka_error_code(error)
                            }
                        }
                    }
                }
            }
        }
    }

    private static func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }

    /// Header names as C strings that stay valid for the duration of `body`.
    private static func withHeaderNames<R>(_ headers: [KafkaHeader], _ body: ([UnsafeMutablePointer<CChar>]) -> R) -> R {
        let names = headers.map { strdup($0.name)! }
        defer { names.forEach { free($0) } }
        return body(names)
    }

    private static func withHeaderValues<R>(_ headers: [KafkaHeader], names: [UnsafeMutablePointer<CChar>],
                                            into values: [rd_kafka_vu_t], _ body: ([rd_kafka_vu_t]) -> R) -> R {
        // Header values are copied by librdkafka; they only need to outlive the call.
        let buffers = headers.map { header -> UnsafeMutableRawBufferPointer in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(header.value.count, 1), alignment: 1)
            buffer.copyBytes(from: header.value)
            return buffer
        }
        defer { buffers.forEach { $0.deallocate() } }
        var all = values
        for (index, header) in headers.enumerated() {
            var vu = rd_kafka_vu_t()
            vu.vtype = RD_KAFKA_VTYPE_HEADER
            vu.u.header.name = UnsafePointer(names[index])
            vu.u.header.val = UnsafeRawPointer(buffers[index].baseAddress)
            vu.u.header.size = header.value.count
            all.append(vu)
        }
        return body(all)
    }
}

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
                    var values = [
                        field(RD_KAFKA_VTYPE_TOPIC) { $0.u.cstr = topicName },
                        bytesField(RD_KAFKA_VTYPE_VALUE, valueBytes),
                        field(RD_KAFKA_VTYPE_MSGFLAGS) { $0.u.i = RD_KAFKA_MSG_F_COPY },
                        field(RD_KAFKA_VTYPE_OPAQUE) { $0.u.ptr = opaque },
                    ]
                    if let keyBytes { values.append(bytesField(RD_KAFKA_VTYPE_KEY, keyBytes)) }
                    if let timestampMilliseconds {
                        values.append(field(RD_KAFKA_VTYPE_TIMESTAMP) { $0.u.i64 = timestampMilliseconds })
                    }
                    // One header list owned by the caller until the produce succeeds: librdkafka
                    // 2.0's per-header form (VTYPE_HEADER) frees its list twice when a produce fails.
                    let list = headers.isEmpty ? nil : headerList(headers)
                    if let list { values.append(field(RD_KAFKA_VTYPE_HEADERS) { $0.u.headers = list }) }
                    return values.withUnsafeBufferPointer { buffer in
                        guard let error = rd_kafka_produceva(handle, buffer.baseAddress, buffer.count) else {
                            return RD_KAFKA_RESP_ERR_NO_ERROR
                        }
                        defer { rd_kafka_error_destroy(error) }
                        if let list { rd_kafka_headers_destroy(list) }
                        return rd_kafka_error_code(error)
                    }
                }
            }
        }
    }

    private static func field(_ type: rd_kafka_vtype_t, _ set: (inout rd_kafka_vu_t) -> Void) -> rd_kafka_vu_t {
        var field = rd_kafka_vu_t()
        field.vtype = type
        set(&field)
        return field
    }

    private static func bytesField(_ type: rd_kafka_vtype_t, _ bytes: UnsafeRawBufferPointer) -> rd_kafka_vu_t {
        field(type) {
            $0.u.mem.ptr = UnsafeMutableRawPointer(mutating: bytes.baseAddress)
            $0.u.mem.size = bytes.count
        }
    }

    /// A librdkafka header list (values copied in).
    private static func headerList(_ headers: [KafkaHeader]) -> OpaquePointer {
        let list = rd_kafka_headers_new(headers.count)!
        for header in headers {
            header.value.withUnsafeBytes { bytes in
                _ = rd_kafka_header_add(list, header.name, -1, bytes.baseAddress, bytes.count)
            }
        }
        return list
    }

    private static func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }
}

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

/* Swift cannot call C variadic functions: one error (no delay) on a broker's error stack. */
static inline rd_kafka_resp_err_t
fr_mock_broker_push_request_error(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id,
                                  int16_t api_key, rd_kafka_resp_err_t error) {
    return rd_kafka_mock_broker_push_request_error_rtts(mcluster, broker_id, api_key, 1, error, 0);
}
